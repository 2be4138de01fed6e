"""The farm's mamba-ssm wheel on a GPU: its selective scan (forward and backward) against plain torch.

    python bench/gpu_check_mamba.py --wheel PATH/mamba_ssm-...whl [--results bench/results]

Needs a CUDA GPU the wheel has code for (bench/heavy_cell.py builds sm_90: an H100) and the torch the wheel
was built against (2.11, CUDA 13.0) in this Python (3.12). The wheel is unpacked into a temporary folder
and put first on sys.path (nothing is installed); only its compiled module, ``selective_scan_cuda``, is
loaded. The reference is the selective scan written in plain torch, as mamba-ssm's own tests check it
(state-spaces/mamba@v2.3.2.post1:mamba_ssm/ops/selective_scan_interface.py, ``selective_scan_ref``; here
for real A and variable B and C of shape (batch, groups, dstate, length)), in float32 on the same GPU;
gradients through it by autograd against the kernel's backward. Prints one line per case and exits 1 if
any differs beyond its tolerance (mamba's tests use these: 6e-4 fp32, 3e-3 fp16 and 5e-2 bf16, relative).
With ``--results DIR`` it also writes DIR/gpu_check_mamba-<UTC>.json (the GPU, torch, the wheel's sha256 and
every case) for tools/perf_docs.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path

TOLERANCE = {"float32": (6e-4, 2e-3), "float16": (3e-3, 5e-3), "bfloat16": (5e-2, 1e-1)}  # (rtol, atol)


def reference(u, delta, A, B, C, D, z, delta_bias, softplus):  # type: ignore[no-untyped-def]
    """Plain torch, float32: x_t = exp(delta A) x_{t-1} + delta B_t u_t, y_t = C_t x_t (+ D u, * silu(z))."""
    import torch
    import torch.nn.functional as F

    dtype = u.dtype
    u, delta = u.float(), delta.float() + delta_bias[..., None].float()
    if softplus:
        delta = F.softplus(delta)
    batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
    groups = B.shape[1]
    Bx = B.float().repeat_interleave(dim // groups, dim=1)  # (b, d, n, l)
    Cx = C.float().repeat_interleave(dim // groups, dim=1)
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bdnl,bdl->bdln", delta, Bx, u)
    x = A.new_zeros((batch, dim, dstate))
    ys = []
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        ys.append(torch.einsum("bdn,bdn->bd", x, Cx[:, :, :, i]))
    out = torch.stack(ys, dim=2) + u * D[:, None]
    out = out * F.silu(z.float())
    return out.to(dtype)


def case(module, dtype_name: str, seqlen: int) -> tuple[bool, str]:  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(0)
    dev, dtype = "cuda", getattr(torch, dtype_name)
    batch, dim, dstate, groups = 2, 24, 16, 2
    u = torch.randn(batch, dim, seqlen, device=dev, dtype=dtype, requires_grad=True)
    delta = (0.5 * torch.rand(batch, dim, seqlen, device=dev, dtype=dtype)).requires_grad_()
    A = (-0.5 * torch.rand(dim, dstate, device=dev, dtype=torch.float32)).requires_grad_()
    B = torch.randn(batch, groups, dstate, seqlen, device=dev, dtype=dtype, requires_grad=True)
    C = torch.randn(batch, groups, dstate, seqlen, device=dev, dtype=dtype, requires_grad=True)
    D = torch.randn(dim, device=dev, dtype=torch.float32, requires_grad=True)
    z = torch.randn(batch, dim, seqlen, device=dev, dtype=dtype, requires_grad=True)
    bias = (0.5 * torch.rand(dim, device=dev, dtype=torch.float32)).requires_grad_()
    inputs = (u, delta, A, B, C, D, z, bias)
    # the kernel: forward (out, scan states, out * silu(z)), then its backward for a given dout
    out, x, out_z = module.fwd(u, delta, A, B, C, D, z, bias, True)
    dout = torch.randn_like(out_z)
    grads = module.bwd(u, delta, A, B, C, D, z, bias, dout, x, out, None, True, False)
    ref = reference(u, delta, A, B, C, D, z, bias, True)
    ref_grads = torch.autograd.grad(ref, inputs, dout)
    rtol, atol = TOLERANCE[dtype_name]
    worst, ok = 0.0, torch.allclose(out_z.float(), ref.float(), rtol=rtol, atol=atol)
    worst = max(worst, float((out_z.detach().float() - ref.detach().float()).abs().max()))
    names = ("du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias")
    order = (0, 1, 2, 3, 4, 5, 7, 6)  # bwd returns du, ddelta, dA, dB, dC, dD, ddelta_bias, dz
    bad = []
    for name, i, want in zip(names, order, ref_grads, strict=True):
        got = grads[i].float().reshape(want.shape)
        scale = max(1.0, float(want.abs().max()))
        if not torch.allclose(got, want.float(), rtol=rtol * 10, atol=atol * 10 * scale):
            bad.append(f"{name} {float((got - want.float()).abs().max()):.3g}")
    ok = ok and not bad
    detail = f"forward max |diff| {worst:.3g}" + (f"; gradients off: {', '.join(bad)}" if bad else "; gradients match")
    return ok, detail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--results", type=Path, help="write gpu_check_mamba-<UTC>.json here")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    with tempfile.TemporaryDirectory(prefix="wf-gpu-check-") as tmp:
        with zipfile.ZipFile(args.wheel) as archive:
            archive.extractall(tmp)
        sys.path.insert(0, tmp)
        import selective_scan_cuda

        where = Path(selective_scan_cuda.__file__).resolve()
        assert str(where).startswith(str(Path(tmp).resolve())), where
        name = torch.cuda.get_device_name()
        print(f"{args.wheel.name} on {name} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), torch "
              f"{torch.__version__}: selective_scan_cuda from the wheel")  # fmt: skip
        cases = []
        for dtype in ("float32", "float16", "bfloat16"):
            for seqlen in (64, 777, 2048):
                ok, detail = case(selective_scan_cuda, dtype, seqlen)
                cases.append({"dtype": dtype, "seqlen": seqlen, "result": "ok" if ok else "FAIL", "detail": detail})
                print(f"  {'ok  ' if ok else 'FAIL'} {dtype:9} seqlen {seqlen:5}: {detail}")
    failed = sum(c["result"] != "ok" for c in cases)
    print(f"{'all match' if not failed else f'{failed} case(s) differ'} the plain-torch reference")
    if args.results is not None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        record = {
            "wheel": args.wheel.name,
            "wheel_sha256": hashlib.sha256(args.wheel.read_bytes()).hexdigest(),
            "gpu": name,
            "capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "reference": "selective_scan_ref in plain torch (state-spaces/mamba@v2.3.2.post1), forward and autograd",
            "all_match": not failed,
            "cases": cases,
        }
        args.results.mkdir(parents=True, exist_ok=True)
        out = args.results / f"gpu_check_mamba-{stamp}.json"
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

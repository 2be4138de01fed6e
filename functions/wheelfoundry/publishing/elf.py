"""What a compiled file of a wheel is for, read from its ELF dynamic symbols (pyelftools).

Python imports a file as an extension module when it defines ``PyInit_<name>`` for the name it is imported
under, whatever its suffix: setuptools' ``BuildExtension.with_options(no_python_abi_suffix=True)`` installs
``pkg/csrc.so`` and ``from pkg import csrc`` loads it. A library loaded by path (PyG's ``_version_cpu.so``
through ``torch.ops.load_library``, a ``ctypes.CDLL`` target) defines no ``PyInit_`` on Linux. The name
alone cannot tell the two apart; the file's exported symbols can.
"""

from __future__ import annotations

import io
import re

# A name Python can import a ``<name>.so`` file under (the last part of the module path).
PLAIN_MODULE = re.compile(r"^(?P<mod>(?:[A-Za-z_][A-Za-z0-9_]*/)*(?P<name>[A-Za-z_][A-Za-z0-9_]*))\.so$")


def defined_symbols(data: bytes) -> frozenset[str]:
    """The dynamic symbols ``data`` (an ELF shared object) defines; empty when it is not an ELF file."""
    if data[:4] != b"\x7fELF":
        return frozenset()
    # Imported here: pyelftools costs ~0.3 s to import, and only a wheel with an unsuffixed .so needs it.
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSegment
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(data))
        section = elf.get_section_by_name(".dynsym")
        # No section headers (a stripped-down file): the dynamic segment still lists the symbols.
        segment = next((s for s in elf.iter_segments() if isinstance(s, DynamicSegment)), None)
        table = section if isinstance(section, SymbolTableSection) else segment
        if table is None:
            return frozenset()
        return frozenset(sym.name for sym in table.iter_symbols() if sym.name and sym["st_shndx"] != "SHN_UNDEF")
    except (ELFError, ValueError, KeyError, OSError, OverflowError, IndexError, AttributeError, TypeError):
        return frozenset()  # a truncated or crafted file (a build's bytes are untrusted): not a module we vouch for


def is_plain_extension_module(path: str, data: bytes) -> bool:
    """True when ``path`` is ``<pkg>/<name>.so`` with no ABI suffix and its bytes define ``PyInit_<name>``."""
    match = PLAIN_MODULE.match(path)
    return match is not None and f"PyInit_{match['name']}" in defined_symbols(data)

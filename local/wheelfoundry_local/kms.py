"""KMS as AWS answers it, where moto 5.2.1 differs, for the stack's provenance key.

- CloudFormation: moto's ``AWS::KMS::Key`` model creates every key as SYMMETRIC_DEFAULT /
  ENCRYPT_DECRYPT, whatever the template says; AWS creates the ``KeySpec`` and ``KeyUsage`` asked for
  (here an ECC_NIST_P256 SIGN_VERIFY key).
- Sign and Verify: moto ignores ``MessageType`` and always hashes the message, so a ``DIGEST`` (the
  SHA-256 the caller computed) would be hashed a second time and the signature would not verify against
  the message anywhere else. AWS signs the digest as given ("KMS skips the hashing step",
  API_Sign.html), and refuses a RAW message over 4096 bytes. Signatures are real ECDSA signatures by the
  key's private key (moto's), checked with the public key that GetPublicKey returns.

Key policies are stored, not enforced (moto enforces none); tests/test_template.py evaluates the
provenance key's policy with the project's IAM evaluator instead.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ._moto import Patches

RAW_LIMIT = 4096


def _hash(algorithm: str) -> Any:
    from cryptography.hazmat.primitives import hashes

    return {"ECDSA_SHA_256": hashes.SHA256(), "ECDSA_SHA_384": hashes.SHA384(), "ECDSA_SHA_512": hashes.SHA512()}[
        algorithm
    ]


def _message(response: Any) -> tuple[bytes, str]:
    from moto.kms.exceptions import ValidationException

    message = response._get_param("Message")
    message = message.encode("utf-8") if isinstance(message, str) else message
    kind = response._get_param("MessageType") or "RAW"
    if kind == "RAW" and len(message) > RAW_LIMIT:
        raise ValidationException(f"Message is {len(message)} bytes; a RAW message may be at most {RAW_LIMIT}")
    return message, kind


def _key_and_algorithm(response: Any) -> tuple[Any, str]:
    """The request's key and signing algorithm, refused as KMS refuses one the key does not support."""
    from moto.kms.exceptions import ValidationException

    key = response.kms_backend.describe_key(response._get_param("KeyId"))
    algorithm = response._get_param("SigningAlgorithm")
    if algorithm not in key.signing_algorithms:
        raise ValidationException(f"SigningAlgorithm {algorithm} is not one of {key.signing_algorithms}")
    return key, str(algorithm)


def install(patches: Patches) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
    from moto.kms.models import Key, kms_backends
    from moto.kms.responses import KmsResponse

    def create_from_cloudformation_json(
        cls: Any, /, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **kwargs: Any
    ) -> Any:
        props = cloudformation_json["Properties"]
        key = kms_backends[account_id][region_name].create_key(
            policy=json.dumps(props["KeyPolicy"]) if isinstance(props["KeyPolicy"], dict) else props["KeyPolicy"],
            key_usage=props.get("KeyUsage", "ENCRYPT_DECRYPT"),
            key_spec=props.get("KeySpec", "SYMMETRIC_DEFAULT"),
            description=props.get("Description"),
            tags=props.get("Tags", []),
        )
        key.key_rotation_status = props.get("EnableKeyRotation", False)
        key.enabled = props.get("Enabled", True)
        return key

    patches.set(Key, "create_from_cloudformation_json", classmethod(create_from_cloudformation_json))
    original_sign, original_verify = KmsResponse.sign, KmsResponse.verify

    def sign(response: Any) -> str:
        message, kind = _message(response)
        if kind != "DIGEST":
            return original_sign(response)
        key, algorithm = _key_and_algorithm(response)
        signature = key.private_key.private_key.sign(message, ec.ECDSA(Prehashed(_hash(algorithm))))
        return json.dumps(
            {"KeyId": key.arn, "Signature": base64.b64encode(signature).decode(), "SigningAlgorithm": algorithm}
        )

    def verify(response: Any) -> str:
        message, kind = _message(response)
        if kind != "DIGEST":
            return original_verify(response)
        key, algorithm = _key_and_algorithm(response)
        signature = response._get_param("Signature")
        signature = base64.b64decode(signature) if isinstance(signature, str) else signature
        try:
            key.private_key.private_key.public_key().verify(signature, message, ec.ECDSA(Prehashed(_hash(algorithm))))
            valid = True
        except InvalidSignature:
            valid = False
        return json.dumps({"KeyId": key.arn, "SignatureValid": valid, "SigningAlgorithm": algorithm})

    patches.set(KmsResponse, "sign", sign)
    patches.set(KmsResponse, "verify", verify)

"""S3 credentials from the standard AWS chain, and from nowhere else.

obstore reads most of the chain itself, in AWS's order: AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, web identity (AWS_WEB_IDENTITY_TOKEN_FILE
with AWS_ROLE_ARN: EKS, GitHub Actions), ECS and EKS container credentials, then
EC2 instance metadata (IMDSv2). It does not read the shared files that
`aws configure` writes, so this module does, where the chain puts them (after
the environment and web identity, before containers and IMDS):

- a profile (AWS_PROFILE, else `default`) with keys in ~/.aws/credentials or
  ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE): those keys,
  and the profile's region when the environment names none;
- a profile that gets them from SSO, a role or a process: botocore's own
  chain when boto3 is installed (the one dependency it would add is large,
  and a clone needs none of it), else one line saying so.

Nothing here logs or returns a credential in a message.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from git_mgit.transfer.stores.blobs import BlobStoreError

_STATIC = ("aws_access_key_id", "aws_secret_access_key")
_DYNAMIC = (
    "role_arn",
    "source_profile",
    "credential_source",
    "credential_process",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
    "login_session",
)
_CONTAINER = ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
_REFRESH = timedelta(minutes=5)  # how long obstore may keep one answer of botocore's


@dataclass(frozen=True)
class Chain:
    """What obstore needs beyond what it reads from the environment itself."""

    config: dict[str, str] = field(default_factory=dict)  # S3Config keys
    provider: Any = None  # a callable returning obstore's S3Credential, or None
    source: str = "EC2 instance metadata"
    secrets: tuple[str, ...] = ()  # values no message may contain
    found: bool = False  # False: nothing but EC2 instance metadata (IMDS) could answer


def resolve(env: Mapping[str, str] | None = None) -> Chain:
    """The chain's answer for this process: obstore's own, or a shared profile's."""
    env = os.environ if env is None else env
    name = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE")
    explicit = name is not None
    name = name or "default"
    home = Path(env.get("HOME") or Path.home())
    creds_file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    config_file = Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config")
    conf = _section(config_file, [f"profile {name}"] + (["default"] if name == "default" else []))
    config: dict[str, str] = {}
    # The region is resolved apart from the credentials, as AWS's chain does: the
    # environment's, else the profile's, wherever the keys come from.
    if conf.get("region") and not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        config["region"] = conf["region"]
    from_env = tuple(env[k] for k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN") if env.get(k))
    if env.get("AWS_ACCESS_KEY_ID"):  # obstore reads them, first in the chain as in AWS's
        shown = "AWS_ACCESS_KEY_ID in the environment"
        return Chain(config, source=shown, secrets=from_env, found=True)
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return Chain(config, source="web identity (AWS_WEB_IDENTITY_TOKEN_FILE)", found=True)
    creds = _section(creds_file, [name])
    for where, values in ((creds_file, creds), (config_file, conf)):
        if all(values.get(k) for k in _STATIC):
            config["access_key_id"] = values["aws_access_key_id"]
            config["secret_access_key"] = values["aws_secret_access_key"]
            if values.get("aws_session_token"):
                config["session_token"] = values["aws_session_token"]
            hidden = (values["aws_secret_access_key"], values.get("aws_session_token", ""))
            shown = f"profile {name} in {where}"
            return Chain(config, None, shown, tuple(s for s in hidden if s), found=True)
    if any(conf.get(k) for k in _DYNAMIC):
        provider = _botocore_provider(name)
        return Chain(config, provider, f"profile {name} (through botocore)", found=True)
    if explicit:
        raise BlobStoreError(
            f"AWS_PROFILE={name} names no profile with credentials in {creds_file} or "
            f"{config_file}; run `aws configure --profile {name}` or unset AWS_PROFILE"
        )
    container = [k for k in _CONTAINER if env.get(k)]
    if container:
        return Chain(config, source=f"container credentials ({container[0]})", found=True)
    return Chain(config)


def _section(path: Path, names: list[str]) -> dict[str, str]:
    """A profile's keys from an AWS ini file ({} when the file or profile is not there)."""
    parser = configparser.RawConfigParser(default_section="\0none")
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise BlobStoreError(
            f"{path}: not an AWS config file ({type(exc).__name__}); fix or move it"
        ) from None
    for name in names:
        if parser.has_section(name):
            return {k.lower(): v.strip() for k, v in parser.items(name)}
    return {}


def _botocore_provider(profile: str) -> Any:
    """botocore's credentials for `profile` (SSO, roles, processes), refreshed as it sees fit."""
    try:
        import botocore.session
    except ImportError:
        raise BlobStoreError(
            f"AWS profile {profile} gets its credentials from SSO, a role or a process, which "
            "git-mgit reads through boto3: pip install boto3, or export AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY"
        ) from None
    try:
        credentials = botocore.session.Session(profile=profile).get_credentials()
    except Exception as exc:  # botocore raises many kinds; its message names no secret
        raise BlobStoreError(
            f"AWS profile {profile}: botocore found no credentials ({type(exc).__name__}: {exc}); "
            f"run `aws sso login --profile {profile}` or check the profile"
        ) from None
    if credentials is None:
        raise BlobStoreError(
            f"AWS profile {profile}: botocore found no credentials; "
            f"run `aws sso login --profile {profile}` or check the profile"
        )

    def provide() -> dict[str, Any]:
        frozen = credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(timezone.utc) + _REFRESH,
        }

    return provide

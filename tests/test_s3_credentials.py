"""The S3 store's part of the AWS chain (stores/s3/credentials.py), without a bucket.

The end-to-end cases (a shared profile's keys, a credential process through
botocore, no credentials at all) run against SeaweedFS in test_s3_store.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from git_mgit.transfer.stores.s3.credentials import resolve

KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home whose ~/.aws/config gives the default profile a region and no keys."""
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "config").write_text("[default]\nregion = eu-west-3\n")
    return tmp_path


@pytest.mark.parametrize(
    "source",
    [KEYS, {"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ROLE_ARN": "arn:aws:iam::1:r"}],
)
def test_the_profiles_region_holds_wherever_the_keys_come_from(
    home: Path, source: dict[str, str]
) -> None:
    """AWS resolves the region apart from the credentials: keys exported in the
    environment (or a web identity) still take ~/.aws/config's region. Without it the
    store asked us-east-1, and AWS refused every request for a bucket elsewhere."""
    chain = resolve({"HOME": str(home), **source})
    assert chain.found and chain.config == {"region": "eu-west-3"}
    assert "wJalrXUtnFEMI" not in chain.source


def test_the_environments_region_wins_over_the_profiles(home: Path) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        chain = resolve({"HOME": str(home), name: "ap-south-1", **KEYS})
        assert "region" not in chain.config  # obstore reads the environment's itself

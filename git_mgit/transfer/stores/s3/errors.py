"""What an S3 store said, as one line: where, what failed, S3's own code and message, what to do.

obstore's exceptions carry the request, the status and the store's XML error
body over many lines; users get S3's error code (AccessDenied, NoSuchBucket,
SignatureDoesNotMatch...) and message, with the fix for that code. No
credential can reach the line: it is built from those fields only, and any
secret the chain holds is masked in what the store echoed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from git_mgit.console.quoted import quoted
from git_mgit.transfer.stores.blobs import BlobStoreError

_CREDENTIALS = (
    "check the credentials the AWS chain finds ({source}): AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials"
)
_REGION = "the bucket is in another region: set git config mgit.s3Region (or AWS_REGION)"
_AGAIN = "run the command again later: it resumes where it stopped"
_HINTS = {
    "SignatureDoesNotMatch": "the secret key does not match the access key; " + _CREDENTIALS,
    "InvalidAccessKeyId": "the store does not know this access key; " + _CREDENTIALS,
    "Unauthenticated": "the store did not accept the credentials; " + _CREDENTIALS,
    "NoCredentials": "no credentials were found (EC2 instance metadata, the AWS chain's last "
    "resort, did not answer): export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a "
    "profile of ~/.aws/credentials in AWS_PROFILE",
    "ExpiredToken": "the session token expired: renew it (aws sso login) and run the command again",
    "InvalidToken": "the session token is not valid: renew it and run the command again",
    "AccessDenied": "these credentials may not do that: grant s3:GetObject, s3:PutObject and "
    "s3:ListBucket on {bucket}",
    "AllAccessDisabled": "the bucket's owner disabled access to it",
    "NoSuchBucket": "create bucket {bucket}, or fix git config mgit.store",
    "PermanentRedirect": _REGION,
    "AuthorizationHeaderMalformed": _REGION,
    "IllegalLocationConstraintException": _REGION,
    "Unreachable": "check the endpoint (git config mgit.s3Endpoint) and the network, then "
    + _AGAIN,
}
_BY_TYPE = {
    "PermissionDeniedError": "AccessDenied",
    "UnauthenticatedError": "Unauthenticated",
    "NotFoundError": "NotFound",
}
_METADATA = re.compile(r"169\.254\.169\.254|fd00:ec2::254|/latest/api/token|/latest/meta-data")
_UNREACHABLE = re.compile(
    r"error sending request|connection refused|dns error|timed out|connection reset|"
    r"broken pipe|incomplete message|connection closed",
    re.IGNORECASE,
)


def s3_code(exc: BaseException) -> str:
    """S3's error code in `exc` (`NoSuchKey`, `AccessDenied`...), else a kind of our own."""
    text = str(exc)
    if found := re.search(r"<Code>([^<]{1,80})</Code>", text):
        return found.group(1)
    if _METADATA.search(text):  # the chain's last resort, EC2 instance metadata, did not answer
        return "NoCredentials"
    if type(exc).__name__ in _BY_TYPE:
        return _BY_TYPE[type(exc).__name__]
    if status := re.search(r"status code: (\d{3})", text):
        return f"HTTP {status.group(1)}"
    return "Unreachable" if _UNREACHABLE.search(text) else type(exc).__name__


def store_error(
    where: str,
    doing: str,
    exc: BaseException,
    *,
    bucket: str,
    source: str,
    secrets: Iterable[str] = (),
) -> BlobStoreError:
    """One line for a failed request: `where: doing failed: Code (message); what to do`."""
    text = str(exc)
    code = s3_code(exc)
    said = re.search(r"<Message>([^<]{1,300})</Message>", text)
    detail = quoted(said.group(1)) if said else ""
    if retries := re.search(r"after (\d+) retries", text):
        detail = f"{detail}; " if detail else ""
        detail += f"still failing after {retries.group(1)} retries"
    hint = _HINTS.get(code)
    if hint is None:
        hint = _AGAIN if code.startswith("HTTP 5") or retries else "see the store's documentation"
    line = f"{where}: {doing} failed: {code}" + (f" ({detail})" if detail else "")
    line = f"{line}; {hint.format(bucket=bucket, source=source)}"
    for secret in secrets:
        if secret:
            line = line.replace(secret, "***")
    return BlobStoreError(" ".join(line.split()))

"""The LFS client's TLS context, as git's `http.ssl*` settings make curl's.

The CAs git is told of are trusted beside the system's (git-lfs's way: a
company CA for its git server, and public storage hosts stay trusted). A
client key behind a passphrase is opened as git opens it: with
`http.sslCertPasswordProtected` (or `GIT_SSL_CERT_PASSWORD_PROTECTED`) the
passphrase comes from `git credential fill` for `cert:///<the certificate's
path>` (a helper, else git's own prompt), is approved once it opens the key
and rejected when it does not; without that setting OpenSSL would prompt on
the terminal, under a git that waits on the filter, so the key is refused in
one line instead.
"""

from __future__ import annotations

import ssl
from ssl import SSLContext

from git_mgit.transfer.stores.blobs import BlobStoreError
from git_mgit.transfer.stores.lfs.creds import GitCredentials
from git_mgit.transfer.stores.lfs.httpconfig import Tls


def client_context(tls: Tls, helper: GitCredentials | None = None) -> SSLContext:
    """A client context as git's settings ask; BlobStoreError naming the file it cannot use
    (`helper`: where a protected key's passphrase comes from)."""
    try:
        context = ssl.create_default_context()
        if tls.ca_file or tls.ca_path:
            context.load_verify_locations(cafile=tls.ca_file, capath=tls.ca_path)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise _unusable(tls, exc) from None
    if tls.cert:
        _load_certificate(context, tls, helper)
    if not tls.verify:  # http.sslVerify=false or GIT_SSL_NO_VERIFY, as git has it
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_certificate(context: SSLContext, tls: Tls, helper: GitCredentials | None) -> None:
    assert tls.cert is not None
    if not tls.password_protected or helper is None:
        try:  # a key behind a passphrase fails here, as curl's does, never prompts
            context.load_cert_chain(tls.cert, tls.key, password=_no_passphrase)
        except (OSError, ValueError) as exc:
            raise _unusable(tls, exc) from None
        return
    credential = helper.fill_key(tls.cert)
    try:
        context.load_cert_chain(tls.cert, tls.key, password=credential.get("password") or "")
    except ssl.SSLError:
        helper.reject(credential)  # a wrong passphrase is not kept (git rejects it too)
        raise BlobStoreError(
            f"the client key for {tls.cert} did not open with the passphrase git's credential "
            "helper gave (now rejected there); run the command again to be asked anew, or "
            "check http.sslCert and http.sslKey"
        ) from None
    except OSError as exc:
        raise _unusable(tls, exc) from None
    helper.approve(credential)


def _no_passphrase() -> str:
    raise ValueError(
        "a client key behind a passphrase: set http.sslCertPasswordProtected true for git "
        "and git-mgit to ask for it"
    )


def _unusable(tls: Tls, exc: OSError | ValueError) -> BlobStoreError:
    files = [f for f in (tls.ca_file, tls.ca_path, tls.cert, tls.key) if f]
    return BlobStoreError(
        f"git's TLS settings name files the LFS client cannot use ({', '.join(files)}: "
        f"{getattr(exc, 'strerror', None) or exc}); check http.sslCAInfo, http.sslCAPath, "
        "http.sslCert and http.sslKey (or GIT_SSL_CAINFO and the like)"
    )

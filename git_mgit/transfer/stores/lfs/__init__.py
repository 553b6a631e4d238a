"""The Git LFS blob store: a remote's LFS server through the Batch API (`basic` transfers).

Modelled on git-lfs's own layout:

- endpoint.py: which LFS server a remote uses (lfsapi/endpoint_finder.go);
- gitconfig.py: git config over the committed .lfsconfig (config/);
- sshauth.py: git-lfs-authenticate over ssh (lfshttp/ssh.go, ssh/);
- creds.py, auth.py: git credential fill/approve/reject, access modes (creds/, lfsapi/auth.go);
- policy.py: where credentials may go; URLs as users see them;
- http.py: redirects, credentials on the wire (lfshttp/);
- httpconfig.py: git's `http.*` settings for a URL: TLS, proxy, extra headers
  (lfshttp/certs.go, proxy.go);
- connections.py: keep-alive connections per server (lfshttp/client.go);
- tls.py: the TLS context: git's CAs, a client certificate and its key's passphrase;
- tunnel.py: a connection through a proxy: HTTP CONNECT, SOCKS 4, 4a and 5;
- proxylogins.py: a proxy's password from git credential (a URL with a user only);
- retry.py: backoff, Retry-After (tq/transfer_queue.go);
- batch.py, api.py: the Batch API (tq/api.go);
- basic.py: the basic transfer adapter (tq/basic_upload.go, basic_download.go);
- store.py: LfsStore, the BlobStore (tq/transfer_queue.go);
- trace.py: GIT_TRACE lines.
"""

from git_mgit.transfer.stores.lfs.endpoint import KNOWN_HOSTS, Endpoint, endpoint_for
from git_mgit.transfer.stores.lfs.policy import may_send_credentials
from git_mgit.transfer.stores.lfs.store import LfsStore

__all__ = ["KNOWN_HOSTS", "Endpoint", "LfsStore", "endpoint_for", "may_send_credentials"]

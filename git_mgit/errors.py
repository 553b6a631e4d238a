"""One exception type per failure a user can act on.

Every message is one line that names the file and says what to do, so the
filter, hooks and CLI can print it as is.
"""


class MgitError(Exception):
    """Base class: a failure with a one-line, user-facing message."""


class NotSafetensors(MgitError):
    """The bytes are not a valid safetensors file (they get stored opaque)."""


class ObjectMissing(MgitError):
    """A tensor object a manifest needs is neither local nor on any remote."""


class ObjectCorrupt(MgitError):
    """An object does not decode to the content hash it is filed under."""


class ManifestError(MgitError):
    """Text that claims to be a manifest but does not parse."""

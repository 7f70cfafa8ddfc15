"""Exceptions: one class per detcollResult_t, all under DetcollError."""

SUCCESS = 0
UNHANDLED_DEVICE_ERROR = 1
SYSTEM_ERROR = 2
INTERNAL_ERROR = 3
INVALID_ARGUMENT = 4
INVALID_USAGE = 5
REMOTE_ERROR = 6
MISMATCH = 8
TIMEOUT = 9
CLOSED = 10
UNSUPPORTED = 11


class DetcollError(RuntimeError):
    """A detcoll call failed.

    ``code`` is the detcollResult_t (None for errors raised before reaching
    the library), ``function`` the C function, ``detail`` its message.
    """

    code = None

    def __init__(self, message, code=None, function=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.function = function
        self.detail = message


class DeviceError(DetcollError):
    """A CUDA/HIP call failed (detcollUnhandledDeviceError)."""

    code = UNHANDLED_DEVICE_ERROR


class DetcollSystemError(DetcollError):
    """The operating system or the network failed (detcollSystemError)."""

    code = SYSTEM_ERROR


class InternalError(DetcollError):
    """A bug in detcoll (detcollInternalError)."""

    code = INTERNAL_ERROR


class InvalidArgumentError(DetcollError, ValueError):
    """The library rejected an argument (detcollInvalidArgument)."""

    code = INVALID_ARGUMENT


class InvalidUsageError(DetcollError):
    """Bad use: inconsistent ranks, a bad launch environment, no init()."""

    code = INVALID_USAGE


class RemoteError(DetcollError):
    """A peer failed or went away (detcollRemoteError)."""

    code = REMOTE_ERROR


class MismatchError(DetcollError):
    """Ranks called different collectives, counts or dtypes."""

    code = MISMATCH


class DetcollTimeoutError(DetcollError, TimeoutError):
    """A collective or the rendezvous took too long (detcollTimeout)."""

    code = TIMEOUT


class ClosedError(DetcollError):
    """The communicator was destroyed or aborted (detcollClosed)."""

    code = CLOSED


class UnsupportedError(DetcollError, NotImplementedError):
    """Valid, but not in this build: device buffers without a device
    backend, integer sums (detcollUnsupported)."""

    code = UNSUPPORTED


class LibraryNotFoundError(DetcollError, OSError):
    """libdetcoll.so could not be found or loaded."""


_BY_CODE = {
    cls.code: cls
    for cls in (
        DeviceError,
        DetcollSystemError,
        InternalError,
        InvalidArgumentError,
        InvalidUsageError,
        RemoteError,
        MismatchError,
        DetcollTimeoutError,
        ClosedError,
        UnsupportedError,
    )
}


def error_for(code, message, function=None):
    """The exception for a detcollResult_t (DetcollError for unknown codes)."""
    cls = _BY_CODE.get(code, DetcollError)
    return cls(message, code=code, function=function)

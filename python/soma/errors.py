"""soma's status codes as Python exceptions.

Every failing call raises a SomaError (or a subclass) that carries the code, its name
("somaErrorMemoryAllocation"), the call that failed and soma's message, with the numbers
soma put in it. Subclasses also derive from the Python exception a caller would catch:
OutOfMemoryError is a MemoryError, InvalidValueError a ValueError.
"""

from . import _library

SUCCESS = 0
INVALID_VALUE = 1
MEMORY_ALLOCATION = 2
NOT_READY = 600
NOT_SUPPORTED = 801
INVALID_RESOURCE_HANDLE = 400
ADDRESS_SPACE_EXHAUSTED = 10001


class SomaError(RuntimeError):
    """A soma call failed. code: somaError_t; name: its name; call: the C function; message:
    soma's text (somaGetLastErrorMessage, or the package's own for checks made in Python)."""

    def __init__(self, code, call, message):
        self.code = int(code)
        self.name = error_name(code)
        self.call = call
        self.message = message
        super().__init__(f"{call}: {self.name} ({self.code}): {message}")


class OutOfMemoryError(SomaError, MemoryError):
    """somaErrorMemoryAllocation or somaErrorAddressSpaceExhausted: the pool or device is full."""


class InvalidValueError(SomaError, ValueError):
    """somaErrorInvalidValue: a bad argument, an unknown or freed pointer, a double free."""


class InvalidResourceHandleError(SomaError):
    """somaErrorInvalidResourceHandle: a destroyed or never-created stream, event or pool."""


class NotSupportedError(SomaError):
    """somaErrorNotSupported: a valid request this pool or backend does not do."""


_CLASSES = {
    MEMORY_ALLOCATION: OutOfMemoryError,
    ADDRESS_SPACE_EXHAUSTED: OutOfMemoryError,
    INVALID_VALUE: InvalidValueError,
    INVALID_RESOURCE_HANDLE: InvalidResourceHandleError,
    NOT_SUPPORTED: NotSupportedError,
}


def error_name(code):
    """somaGetErrorName of a code ("somaErrorUnknown" style names for unknown codes too)."""
    name = _library.get().somaGetErrorName(int(code))
    return name.decode() if name else f"soma error {code}"


def make_error(code, call, message):
    """The exception of the class that fits code."""
    return _CLASSES.get(int(code), SomaError)(code, call, message)


def check(status, call):
    """Raises the SomaError for a failed status, with soma's message for this thread."""
    if status != SUCCESS:
        text = _library.get().somaGetLastErrorMessage()
        raise make_error(status, call, text.decode(errors="replace") if text else "")

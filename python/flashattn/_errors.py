"""flashattn.Error: a non-OK fa_status with its detail message."""


class Error(RuntimeError):
    """A failing flashattn call: .status (a Status), .message (fa_last_error()'s text, or the
    binding's own message naming the argument)."""

    def __init__(self, status, message):
        from ._structs import Status
        try:
            status = Status(status)
            label = status.name
        except ValueError:
            label = str(status)
        super().__init__("flashattn %s (%d): %s" % (label, int(status), message))
        self.status = status
        self.message = message

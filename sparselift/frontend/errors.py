"""Errors raised for models or inputs SparseLift cannot handle; messages name the module and why."""


class ExportError(ValueError):
    """The model cannot be exported or lifted; the message says which module and why."""

"""What every backend shares at run time: values, errors, the calling convention, the backend interface."""

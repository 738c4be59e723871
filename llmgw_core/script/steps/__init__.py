"""One module per step (or family of steps); each registers itself with `@step`."""

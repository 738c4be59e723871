"""The headless runner: a script of steps run against a fleet, printed as tables or JSON."""

"""The simulated engine: its argv, the lines it prints, and its HTTP server."""

"""The simulated hardware and engine the demo fleet and the tests run the real agent on."""

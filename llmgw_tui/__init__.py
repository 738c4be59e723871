"""llmgw's console: a Textual face over `llmgw_core` that computes nothing of its own."""

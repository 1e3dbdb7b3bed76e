"""llmaz-manager, the process: its flags and wiring (`__main__`), and the guard that refuses a start beside another
llmaz manager (`startguard`). The controllers, webhooks and runtime it composes know nothing of it."""

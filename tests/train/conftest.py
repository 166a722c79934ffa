"""Train test fixtures: the embedded tokenizer and a tiny random Llama over it live in tests/conftest.py."""

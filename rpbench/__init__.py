"""rpbench: train and evaluate role-playing LLMs."""

"""rpbench: train and evaluate role-playing LLMs."""

from rpbench.resolvers import register as _register_resolvers

_register_resolvers()

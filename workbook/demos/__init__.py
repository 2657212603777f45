"""Runnable demonstrations, one module per problem with ``main(argv) -> int``."""

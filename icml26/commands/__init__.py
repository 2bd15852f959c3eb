"""One module per command: options -> Config (icml26.core.preamble) -> a lazy import of the
method package's ``api`` module -> records streamed by icml26.core.output."""

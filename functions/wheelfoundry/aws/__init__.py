"""Logic of the handlers, with AWS clients passed in (so tests drive it against the emulator)."""

"""The base every layer stands on, importing nothing above it: errors, the registry idiom, typed settings,
atomic files, distributed helpers and library-noise control."""

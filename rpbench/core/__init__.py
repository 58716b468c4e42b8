"""The base every layer stands on, importing nothing above it: errors, the registry idiom, typed settings,
atomic files, distributed helpers, library-noise control and progress bars."""

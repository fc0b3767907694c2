"""The cost model against public measurements: a file of published figures, each with its
source and setting (`spec`), the simulator's figure for each (`simulate`), errors per family
(`score`) and the report (`report`, `cli`, `in_reproduce`)."""

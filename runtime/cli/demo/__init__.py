"""``actorbus demo``: an order pipeline end to end on embedded defaults.

- ``_run``: the command; ``_orders``: the orders it makes and how it bills them.
- ``_pipeline``: Publisher -> topic -> billing pool, audit and dead letters.
- ``_spark``: the Spark leg (``local[*]``); ``_report``: the progress bar and summary table.
"""

"""Spark's replayable lease log per consumer (see ``_log``).

- ``_log``: `LeaseLog`, offsets over one consumer's share of a group.
- ``_handover``: how the log takes the group's hand-overs in, settles them on an ack
  and gives them back.
- ``_record``: the leased rows (records and columns) and their Arrow IPC form.
"""

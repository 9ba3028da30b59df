"""Consumer groups' metrics: ``_monitor`` exports each group's position and
lag from the node that sequences the positions log.  The pure part of groups
(keys, values, the table, lag) is ``logstrand.positions``; the client's part
is ``client/_groups.py``."""

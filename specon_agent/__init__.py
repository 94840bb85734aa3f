"""The node agent (DaemonSet): follows training jobs, rewrites CPU limits, reports to the
manager."""

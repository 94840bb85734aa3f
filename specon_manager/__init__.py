"""The manager: scheduler extender, heartbeat API, migration and rebalancing controllers."""

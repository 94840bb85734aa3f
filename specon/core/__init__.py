"""Pure decision code: growth, FlowCon limits, SpeCon categories, scoring and rebalancing.

No I/O, no clock reads, no globals: state in, decisions out."""

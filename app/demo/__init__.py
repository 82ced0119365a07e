"""The demo: a service, a runner and an engine repository on this machine, end to end."""

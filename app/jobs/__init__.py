"""The job queue and what feeds it: the tracked catalogue, the commit x platform x suite matrix,
leases and claims, and the stored measurements."""

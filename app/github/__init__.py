"""GitHub: webhook deliveries (verification, classification, processing) and the commit-status outbox."""

"""Flow control: while a model's engines are saturated, its requests wait in bounded queues, served by priority band
and shared fairly between tenants (docs/tenancy.md, "Flow control")."""

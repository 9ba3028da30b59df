from logstrand.cli import entry_point

entry_point()

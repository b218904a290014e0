"""ember.wire — what every layer above shares about messages: API keys, ember's frame codec, the
typed field readers, reply and error mapping, config definitions and value types such as
``TopicPartition``. The bottom of the protocol stack: it imports only ``ember.errors``."""

"""ember.ingest"""

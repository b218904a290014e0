"""ember.cluster"""

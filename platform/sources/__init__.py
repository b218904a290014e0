"""ember.sources"""

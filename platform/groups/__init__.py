"""ember.groups"""

"""ember.log"""

"""TODO protocol"""

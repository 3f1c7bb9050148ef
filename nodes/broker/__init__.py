"""nodes.broker"""

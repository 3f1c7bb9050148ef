"""nodes.namesrv"""

"""The gateway's front door: the one port clients reach, checking their keys (`front.server`)."""

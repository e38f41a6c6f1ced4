"""Replicas over time: a replica schedule from a time-varying workload's arrival rate and
one replica's capacity, and a simulation of the cluster that follows it
(``kvsim autoscale``)."""

"""What this machine's devices can do and how much memory they use.

Below the engine and the profiles (both ask it), above nothing but torch, NVML
and the standard library: a sweep, the UI's device menu and a backend all check
a device the same way.
"""

"""The supervisor: finds attempts whose step deadline passed and recovers them."""

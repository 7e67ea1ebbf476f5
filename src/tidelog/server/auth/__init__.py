"""Who may do what: the ACL authorizer, the checks the request handlers share, and the
broker's security assembled from its config (listeners, logins, credentials, ACLs)."""

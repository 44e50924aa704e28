"""Running trials: the trial protocol, hosts and their trial children, slots and msrun trials."""

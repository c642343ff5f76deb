"""Small modal screens: approve a fix, a finding with its runbook, help, cluster switcher, save transcript."""

// Package config is ctxproxy's configuration: the YAML file, CTXPROXY_*
// environment variables and flags read into one Config (flags > env >
// file > defaults), every problem reported at once, and what each package
// gets from it (BudgetConfig, GPUConfig, …), whose own checks Load runs
// too. config.example.yaml holds exactly Default; a test keeps them equal.
package config

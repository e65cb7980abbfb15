package main

import "errors"

func runScale(o options) error { return errors.New("not yet") }

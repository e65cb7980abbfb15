package proxy

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctxproxy/ctxproxy/snapshots"
)

// StoreOps counts the session store's operations by store, operation and
// result (ctxproxy_store_operations_total): its Observe is
// snapshots.Config.Observe, set before the store opens, and Deps.StoreOps
// registers it with the proxy's metrics.
type StoreOps struct {
	vec *prometheus.CounterVec
}

// NewStoreOps returns the counters, every operation of both stores at 0.
func NewStoreOps() *StoreOps {
	o := &StoreOps{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ctxproxy_store_operations_total",
		Help: "Session store operations, by store (file, redis), operation and result (ok, not_found, invalid, error).",
	}, []string{"store", "op", "result"})}
	for _, store := range []string{snapshots.StoreFile, snapshots.StoreRedis} {
		for _, op := range []string{snapshots.OpGet, snapshots.OpUpdate, snapshots.OpList, snapshots.OpSaveSnapshot} {
			o.vec.WithLabelValues(store, op, "error")
		}
	}
	return o
}

// Observe counts one operation; err nil is a success, and a miss or a
// refused id are told apart from a failure.
func (o *StoreOps) Observe(store, op string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, snapshots.ErrNotFound):
		result = "not_found"
	case errors.Is(err, snapshots.ErrInvalidID):
		result = "invalid"
	default:
		result = "error"
	}
	o.vec.WithLabelValues(store, op, result).Inc()
}

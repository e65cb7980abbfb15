package sessions

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// calibrationQueue bounds the observations waiting to go on the feed; past
// it, a replica learns an observation on its own.
const calibrationQueue = 1024

// ShareCalibration makes tokens learn the calibration of its counts with
// the other replicas that share feed: each observation goes on the feed,
// and every replica applies the feed in its one order, so that they hold
// the same calibration and count a request alike (X-Ctxproxy-Tokens, and
// the cuts made from it). An observation the feed cannot take is learned
// on this replica alone. It returns when ctx is done.
func ShareCalibration(ctx context.Context, tokens *budget.Registry, feed *snapshots.Feed, log *slog.Logger) {
	queue := make(chan budget.Observation, calibrationQueue)
	tokens.Share(func(o budget.Observation) bool {
		select {
		case queue <- o:
			return true
		default:
			return false
		}
	})
	defer tokens.Share(nil)
	go func() {
		failing := false
		for {
			var o budget.Observation
			select {
			case <-ctx.Done():
				return
			case o = <-queue:
			}
			data, _ := json.Marshal(o)
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := feed.Append(actx, data)
			cancel()
			if err != nil {
				tokens.Learn(o)
				if !failing && ctx.Err() == nil {
					log.Warn("sharing a calibration observation with the other replicas failed; learning it here alone", "err", err)
				}
			}
			failing = err != nil
		}
	}()
	feed.Follow(ctx, func(data []byte) {
		var o budget.Observation
		if err := json.Unmarshal(data, &o); err == nil {
			tokens.Learn(o)
		}
	})
}

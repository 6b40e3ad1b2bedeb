package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// JobStatus reads any app's job by its id, for the admin API: ErrNotFound
// for an id that is not a job's shape, a job unknown or whose status has
// expired, or a cluster where async jobs were never set up.
func (c *Client) JobStatus(ctx context.Context, id string) (*JobStatus, error) {
	if !ValidJobID(id) {
		return nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	jobs, err := NewJobStore(c.js.Conn())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	} else if err != nil {
		return nil, err
	}
	return jobs.Get(ctx, id)
}

// JobQueues reads the job queues of every API tier (ReadJobQueues).
func (c *Client) JobQueues(ctx context.Context) ([]JobQueue, error) {
	return ReadJobQueues(ctx, c.js)
}
